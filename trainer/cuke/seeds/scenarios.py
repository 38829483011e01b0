"""Where a problem module comes from, in its author's words: the setting (a field with its models, the parts they
are built of, data sets, what the batch, sequence and feature dimensions hold, the names tensors get there) and what
the module's kind of op does inside such a model (the tensors it acts on, how people say what it does, why they
care, what they call a helper that does it). A problem writer draws one setting per file and uses it throughout:
the docstring, comments, input and size names then tell one consistent story, the way a real user's file does.
Everything here is written for this project."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    """One setting a module can come from. Every field lists alternatives; a file picks one of each."""

    field: str  # "speech recognition"
    models: tuple[str, ...]  # "conformer encoder"
    parts: tuple[str, ...]  # where in the model: "convolution module"
    data: tuple[str, ...]  # data sets or data sources
    items: tuple[str, ...]  # what one entry of the batch is (plural): "utterances"
    steps: tuple[str, ...]  # what the positions of a sequence or grid are (plural): "frames"
    features: tuple[str, ...]  # what the last dimension holds (plural): "mel bins"
    names: tuple[str, ...]  # identifiers of the main input tensor: "mel_frames"
    goals: tuple[str, ...]  # what the model is for: "transcribing meetings"


def _s(field: str, models: str, parts: str, data: str, items: str, steps: str, features: str, names: str,
       goals: str) -> Scenario:
    """A scenario from `;`-separated alternatives (one string per field keeps the table readable)."""
    def split(text: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in text.split(";") if p.strip())
    return Scenario(field, split(models), split(parts), split(data), split(items), split(steps), split(features),
                    split(names), split(goals))


SCENARIOS = [
    _s("speech recognition", "conformer encoder; CTC acoustic model; streaming transducer",
       "convolution module; self-attention block; subsampling stem; joint network; prediction network",
       "LibriSpeech; Common Voice; GigaSpeech; call-centre recordings", "utterances; audio clips",
       "frames; time steps", "mel bins; filterbank channels; acoustic features",
       "mel_frames; fbank_feats; acoustic_feats; speech_feats; encoder_frames",
       "transcribing meeting recordings; on-device dictation; live captioning"),
    _s("text-to-speech", "acoustic model; neural vocoder; non-autoregressive synthesiser",
       "decoder prenet; postnet; upsampling stack; variance adaptor; duration predictor",
       "LJSpeech; VCTK; audiobook narrations", "sentences; utterances", "phonemes; frames; spectrogram frames",
       "spectrogram bins; hidden units; decoder channels", "phoneme_emb; mel_spec; decoder_states; spec_frames",
       "reading audiobooks aloud; voice assistant replies; expressive narration"),
    _s("speaker verification", "x-vector network; ECAPA-style encoder; speaker embedding model",
       "frame-level TDNN; attentive statistics pooling; embedding head; squeeze-excitation block",
       "VoxCeleb; enrolment recordings", "recordings; segments", "frames", "channels; filterbank features",
       "speaker_feats; frame_emb; tdnn_out", "voice login; speaker diarisation; detecting spoofed voices"),
    _s("keyword spotting", "tiny convolutional classifier; wake-word detector; streaming keyword model",
       "depthwise block; classifier; feature front end", "Speech Commands; recorded wake words",
       "clips; one-second windows", "frames", "MFCC coefficients; mel bands", "mfcc; clip_feats; kws_feats",
       "always-on detection on a microcontroller; hands-free control of a smart speaker"),
    _s("music generation", "symbolic music transformer; audio language model; melody continuation model",
       "decoder layer; codebook embedding; relative attention block", "MAESTRO; Lakh MIDI; licensed stems",
       "pieces; bars; excerpts", "note events; tokens; codec frames", "embedding channels; hidden units",
       "note_emb; music_tokens; codec_states", "continuing a piano melody; generating drum loops; accompaniment"),
    _s("music tagging", "audio tagging CNN; music auto-tagger; harmonic CNN", "front end; pooling head; tag classifier",
       "MagnaTagATune; MTG-Jamendo; a streaming catalogue", "tracks; excerpts", "frames", "mel bands; channels",
       "track_feats; spec_frames; music_feats", "genre and mood labels; playlist generation; catalogue search"),
    _s("sound event detection", "CRNN; audio spectrogram transformer; event detector",
       "recurrent block; frame classifier; convolutional front end", "AudioSet; DESED; ESC-50; UrbanSound8K",
       "recordings; soundscapes", "frames", "mel bands", "event_feats; audio_feats; spec",
       "detecting alarms and breaking glass; monitoring city noise; smart home alerts"),
    _s("language modelling", "decoder-only transformer; small GPT; long-context language model",
       "attention block; MLP; final norm; LM head; residual branch",
       "OpenWebText; The Pile; C4; Tiny Shakespeare", "sequences; documents", "tokens; positions",
       "hidden units; model dimensions", "hidden_states; token_states; residual; hidden",
       "next-token prediction; text completion; pretraining at scale"),
    _s("machine translation", "encoder-decoder transformer; multilingual translation model",
       "cross-attention; encoder stack; output projection; decoder layer", "WMT; OPUS; parallel web crawls",
       "sentence pairs; sentences", "subword tokens; positions", "model dimensions",
       "src_states; enc_out; tgt_states; memory", "German-English translation; translating product pages"),
    _s("code completion", "code language model; fill-in-the-middle model", "attention layer; feed-forward block",
       "GitHub code; The Stack; internal repositories", "files; snippets", "tokens", "hidden units",
       "code_states; ctx_states", "completing the next line in an editor; suggesting whole functions"),
    _s("search ranking", "dual encoder; cross-encoder reranker; learning-to-rank model",
       "query tower; document tower; scoring head; pooling layer", "MS MARCO; Natural Questions; click logs",
       "queries; passages; documents", "tokens", "embedding dimensions",
       "query_emb; passage_emb; doc_states; q_vecs", "ranking passages for a search box; semantic search"),
    _s("recommendation", "two-tower recommender; DLRM-style model; sequential recommender",
       "feature interaction layer; embedding bag; top MLP; user tower; item tower",
       "MovieLens; Criteo; Taobao clicks; KuaiRand", "users; impressions; sessions",
       "items in the history; interactions", "embedding dimensions",
       "user_emb; item_emb; history_feats; session_states", "ranking items on a home feed; next-item prediction"),
    _s("ad click prediction", "deep-and-cross network; factorisation machine; wide-and-deep model",
       "cross layer; deep tower; field embedding; interaction layer", "Criteo 1TB; Avazu; auction logs",
       "impressions; requests", "fields", "embedding dimensions", "field_emb; dense_feats; sparse_emb",
       "predicting click-through rates; bidding in ad auctions"),
    _s("image classification", "ResNet; vision transformer; ConvNeXt; EfficientNet",
       "stem; stage; classifier head; patch embedding; bottleneck block",
       "ImageNet; CIFAR-100; Places365; iNaturalist", "images; photos", "patches; pixels", "channels",
       "pixel_values; patch_tokens; feature_map; fmap; img_feats",
       "classifying photos; tagging product images; fine-grained species recognition"),
    _s("object detection", "one-stage detector; DETR-style detector; YOLO-style detector",
       "feature pyramid; box head; neck; query decoder; classification branch",
       "COCO; OpenImages; Objects365", "images", "anchors; object queries", "channels",
       "fpn_feats; box_feats; query_feats; roi_feats", "finding objects in street scenes; counting shelf items"),
    _s("semantic segmentation", "U-Net; DeepLab-style network; SegFormer-style model",
       "decoder; ASPP module; segmentation head; skip fusion", "Cityscapes; ADE20K; Pascal VOC",
       "images; crops", "pixels", "channels", "seg_feats; decoder_feats; mask_logits_in",
       "labelling every pixel of a road scene; matting portraits"),
    _s("medical imaging", "3D U-Net; chest X-ray classifier; lesion detector",
       "encoder stage; attention gate; classifier; decoder stage", "BraTS; CheXpert; LIDC-IDRI; MIMIC-CXR",
       "scans; studies; slices", "voxels; slices", "channels", "scan_feats; ct_slices; xray_feats; mri_feats",
       "finding lesions on CT scans; triaging chest X-rays; tumour segmentation"),
    _s("histopathology", "multiple-instance learner; slide-level classifier; tile encoder",
       "tile encoder; attention pooling; slide head", "TCGA; PatchCamelyon; Camelyon16",
       "slides; biopsies", "tiles; patches", "feature dimensions", "tile_feats; patch_emb; slide_feats",
       "grading tumour tissue; spotting metastases in lymph nodes"),
    _s("satellite imagery", "remote sensing backbone; change detection network; land-cover segmenter",
       "multispectral stem; change detection head; temporal encoder", "Sentinel-2; EuroSAT; BigEarthNet; Landsat",
       "tiles; scenes", "pixels", "spectral bands; channels", "band_feats; tile_feats; sat_feats",
       "mapping crop fields from orbit; monitoring deforestation; flood mapping"),
    _s("video understanding", "video transformer; 3D CNN; video-language model",
       "temporal attention; tube embedding; space-time block", "Kinetics; Something-Something; Ego4D",
       "clips; videos", "frames; tubelets", "channels", "clip_feats; frame_feats; video_tokens",
       "recognising actions in short clips; moderating uploaded videos"),
    _s("autonomous driving", "lidar detector; BEV perception model; motion forecaster",
       "pillar encoder; BEV decoder; occupancy head; trajectory decoder", "nuScenes; Waymo Open; KITTI; Argoverse",
       "sweeps; scenes; agents", "points; pillars; BEV cells", "feature channels",
       "point_feats; bev_feats; pillar_feats; agent_feats", "detecting cars and pedestrians; predicting trajectories"),
    _s("point cloud processing", "PointNet-style network; point transformer", "set abstraction layer; shared MLP",
       "ShapeNet; ModelNet40; ScanNet; S3DIS", "shapes; point clouds; scans", "points", "point features",
       "point_feats; xyz_feats; cloud_feats", "segmenting indoor scans; recognising CAD shapes"),
    _s("pose estimation", "keypoint network; pose transformer; hand tracker", "heatmap head; refinement stage",
       "COCO keypoints; Human3.6M; MPII", "people; person crops", "joints; heatmap pixels", "channels",
       "joint_feats; heatmaps; kp_feats", "tracking body pose for fitness apps; sign-language front ends"),
    _s("depth estimation", "monocular depth network; stereo matcher", "decoder; disparity head; cost volume",
       "KITTI; NYU Depth; driving footage", "images; stereo pairs", "pixels", "channels",
       "depth_feats; disp_feats", "estimating depth from one camera; obstacle avoidance for drones"),
    _s("super-resolution", "ESRGAN-style generator; SwinIR-style restorer", "residual-in-residual block; upsampler",
       "DIV2K; FFHQ; old film scans", "images; patches", "pixels", "channels", "lr_feats; patch_feats",
       "upscaling old photos; restoring compressed video"),
    _s("image generation", "latent diffusion model; diffusion transformer; consistency model",
       "U-Net level; time embedding; denoiser block; cross-attention to text", "LAION; FFHQ; licensed stock photos",
       "images; latents", "latent pixels; tokens", "latent channels", "latents; noisy_latents; unet_feats; dit_tokens",
       "text-to-image sampling; inpainting; product mock-ups"),
    _s("representation learning", "variational autoencoder; masked autoencoder; contrastive learner",
       "encoder; posterior head; decoder; projection head", "CelebA; MNIST; unlabelled web images",
       "images; samples", "pixels; patches", "latent dimensions", "z; posterior_feats; recon; proj_in",
       "learning a compact latent space; self-supervised pretraining"),
    _s("image-text retrieval", "CLIP-style model; vision-language encoder", "projection head; similarity head",
       "LAION; Conceptual Captions; alt-text pairs", "image-text pairs; captions", "tokens; patches",
       "embedding dimensions", "image_emb; text_emb; joint_emb", "zero-shot image search; caption ranking"),
    _s("document understanding", "document transformer; text line recogniser; layout model",
       "layout encoder; CTC head; visual backbone", "scanned invoices; receipts; forms",
       "pages; text lines", "tokens; columns", "channels; hidden units", "line_feats; layout_emb; glyph_feats",
       "reading scanned invoices; extracting fields from forms"),
    _s("handwriting recognition", "handwriting recogniser; online ink model", "recurrent decoder; stroke encoder",
       "IAM; pen tablet logs", "lines; notes", "pen strokes; columns", "features",
       "stroke_feats; ink_feats", "digitising handwritten notes; reading postal addresses"),
    _s("graph learning", "graph neural network; message-passing network; graph transformer",
       "message function; readout; node update; edge update", "ogbn-arxiv; OGB-LSC; citation graphs",
       "graphs; node batches", "nodes; edges", "node features", "node_feats; edge_feats; messages; node_states",
       "predicting paper categories; link prediction in a social graph"),
    _s("molecular modelling", "equivariant network; molecular transformer; message-passing potential",
       "interaction block; atom embedding; readout", "QM9; ZINC; MD17; Open Catalyst", "molecules; conformers",
       "atoms", "feature channels", "atom_feats; mol_emb; atom_states",
       "predicting energies and forces; screening catalysts"),
    _s("protein modelling", "protein language model; structure module; folding network",
       "pair representation; triangle update; evoformer block; sequence embedding", "UniRef50; PDB; AlphaFold DB",
       "proteins; sequences", "residues", "channels", "residue_feats; pair_repr; seq_emb; msa_feats",
       "predicting contacts between residues; designing binders"),
    _s("genomics", "DNA sequence model; regulatory genomics CNN", "dilated convolution; pooling tower",
       "ENCODE tracks; the human reference genome", "sequences; genomic windows", "base pairs; bins", "channels",
       "dna_feats; track_feats; seq_onehot", "predicting gene expression from sequence; variant effect scoring"),
    _s("single-cell biology", "single-cell autoencoder; cell-type classifier", "gene encoder; batch-correction head",
       "Human Cell Atlas; Tabula Sapiens", "cells", "genes", "expression features", "cell_feats; gene_expr",
       "clustering cell types; integrating experiments"),
    _s("weather forecasting", "global weather model; nowcasting network; graph-based forecaster",
       "processor block; encoder mesh; decoder", "ERA5; radar composites; station records",
       "forecasts; time slices", "grid points; lat-lon cells", "atmospheric variables; channels",
       "grid_feats; weather_state; radar_frames", "ten-day forecasts; rain nowcasting"),
    _s("climate modelling", "climate emulator; downscaling network", "spectral block; upsampling decoder",
       "CMIP6; reanalysis archives", "ensemble members; months", "grid cells", "variables",
       "climate_state; field_vars", "emulating decades of simulation; regional downscaling"),
    _s("time-series forecasting", "temporal fusion transformer; N-BEATS-style forecaster; PatchTST-style model",
       "encoder; temporal attention; quantile head; patch embedding", "M4; ETTh1; Electricity; retail sales",
       "series; stores; sensors", "time steps; lags", "covariates; channels",
       "series_feats; history; lag_feats; past_values", "forecasting demand for the next week; inventory planning"),
    _s("energy forecasting", "load forecaster; wind power model", "temporal block; weather encoder",
       "smart meter readings; turbine SCADA logs", "households; substations; turbines", "hours; intervals",
       "features", "load_feats; meter_series; scada_feats", "day-ahead electricity load; wind farm output"),
    _s("traffic forecasting", "spatio-temporal GNN; traffic transformer", "graph convolution; temporal block",
       "METR-LA; PeMS; taxi trip records", "sensors; road segments", "time steps", "features",
       "traffic_feats; speed_series", "predicting congestion; estimating travel times"),
    _s("quantitative finance", "order-book model; credit risk model; volatility forecaster",
       "temporal block; scoring head; event encoder", "limit order book snapshots; loan applications; daily returns",
       "instruments; accounts", "ticks; months", "features", "book_feats; txn_feats; market_state",
       "forecasting short-term price moves; scoring loan risk"),
    _s("fraud detection", "transaction model; sequence classifier", "sequence encoder; risk head",
       "card transactions; payment logs", "cardholders; transactions", "events", "features",
       "txn_emb; event_feats", "flagging fraudulent payments; account takeover alerts"),
    _s("reinforcement learning", "PPO agent; actor-critic network; Q-network",
       "policy head; value head; torso; observation encoder", "Atari games; MuJoCo tasks; Procgen",
       "environments; rollouts", "time steps", "observation features",
       "obs_feats; torso_out; obs_emb", "continuous control; game playing"),
    _s("robot learning", "visuomotor policy; grasping network; diffusion policy",
       "proprioception encoder; action head; vision encoder", "RoboNet; teleoperation demos; bin-picking logs",
       "episodes; demonstrations", "control steps", "joint states; channels",
       "proprio; action_feats; joint_state", "picking objects off a shelf; folding laundry"),
    _s("model-based control", "recurrent state-space model; world model", "dynamics model; reward predictor",
       "replay buffers; simulated rollouts", "trajectories", "steps", "latent dimensions",
       "latent_state; belief; rollout_feats", "planning in imagination; sample-efficient control"),
    _s("conversational assistants", "chat assistant model; response reranker; reward model",
       "decoder layer; reward head; retrieval adapter", "support chat logs; preference data",
       "conversations; turns", "tokens", "hidden units", "turn_states; dialog_emb",
       "answering support tickets; ranking candidate replies"),
    _s("summarisation", "sequence-to-sequence summariser; pointer-generator network", "encoder layer; copy head",
       "CNN/DailyMail; arXiv abstracts; meeting transcripts", "articles; meetings", "tokens", "model dimensions",
       "article_states; enc_hidden", "writing short news summaries; meeting minutes"),
    _s("question answering", "extractive reader; retrieval-augmented generator", "span head; passage encoder",
       "SQuAD; TriviaQA; HotpotQA", "questions; passages", "tokens", "hidden units",
       "passage_states; reader_states", "finding answer spans; answering from manuals"),
    _s("text classification", "BERT-style classifier; distilled encoder", "pooler; classification head",
       "Yelp reviews; Amazon reviews; GLUE", "reviews; sentences", "tokens", "hidden units",
       "review_states; cls_feats; sent_emb", "rating product reviews; routing customer email"),
    _s("industrial inspection", "reconstruction autoencoder; normalising flow; patch-level detector",
       "reconstruction head; feature memory bank", "MVTec AD; production line cameras",
       "parts; inspection images", "pixels; patches", "channels", "patch_feats; insp_feats",
       "spotting defects on a production line; weld inspection"),
    _s("predictive maintenance", "vibration model; sensor transformer", "spectral encoder; health head",
       "bearing vibration logs; pump telemetry", "machines; windows", "samples", "sensor channels",
       "vibration; accel_feats; sensor_feats", "predicting bearing failures; scheduling repairs"),
    _s("biosignal analysis", "ECG classifier; EEG decoder; sleep stager", "residual conv block; spatial filter",
       "PhysioNet; MIMIC waveforms; sleep lab recordings", "recordings; patients", "samples; epochs",
       "leads; electrodes", "ecg_signal; eeg_feats; biosig", "detecting arrhythmias; sleep staging"),
    _s("neural rendering", "neural radiance field; Gaussian splatting renderer", "positional encoding; density head",
       "Blender scenes; phone captures", "rays; views", "samples along the ray", "encoding dimensions",
       "ray_feats; sample_feats", "rendering novel views; capturing rooms for AR"),
    _s("physics simulation", "neural operator; mesh graph network", "Fourier layer; processor; encoder",
       "fluid simulations; cloth simulations", "simulations; meshes", "mesh nodes; grid points", "field channels",
       "field_state; mesh_feats", "emulating fluid flow; cloth animation"),
    _s("astronomy", "galaxy classifier; transient detector", "convolutional stem; light-curve encoder",
       "Galaxy Zoo; ZTF alerts; survey cutouts", "cutouts; light curves", "pixels; epochs", "bands",
       "lightcurve; galaxy_feats", "classifying galaxy shapes; finding supernovae"),
    _s("particle physics", "jet tagger; particle transformer", "particle embedding; interaction block",
       "simulated collision events; open detector data", "jets; events", "particles; hits", "features",
       "particle_feats; jet_feats; hit_feats", "tagging top-quark jets; track reconstruction"),
    _s("precision agriculture", "crop yield model; plant disease classifier", "encoder; yield head",
       "PlantVillage; drone imagery; field sensor logs", "fields; leaf images", "pixels; days", "channels",
       "leaf_feats; field_feats", "spotting blight on leaves; yield estimates"),
    _s("wildlife monitoring", "camera-trap classifier; bird-song model", "backbone; species head",
       "camera-trap images; Xeno-canto; acoustic monitors", "photos; recordings", "patches; frames", "channels",
       "trap_feats; call_feats", "counting animals; bird surveys"),
    _s("sign language recognition", "skeleton transformer; sign recogniser", "skeleton encoder; gloss decoder",
       "WLASL; PHOENIX-2014T", "videos; signers", "frames", "keypoint features", "skeleton_feats; pose_seq",
       "translating signs to text; accessibility tools"),
    _s("mixture-of-experts serving", "sparse MoE language model; expert-parallel transformer",
       "router; expert MLP; shared expert", "chat traffic; instruction data", "sequences; requests", "tokens",
       "hidden units", "router_in; expert_in; tokens_in", "serving a large chat model; batch inference"),
    _s("edge deployment", "int8 mobile network; quantised keyword model", "quantised conv block; classifier",
       "calibration images; on-device logs", "images; frames", "pixels", "channels", "qfeats; edge_feats",
       "running on a phone NPU; battery-powered cameras"),
    _s("legal document analysis", "long-document classifier; clause tagger", "chunk encoder; aggregation head",
       "contracts; court rulings", "documents; clauses", "tokens; chunks", "hidden units",
       "chunk_states; clause_emb", "tagging clauses in contracts; retrieving precedents"),
    _s("network security", "intrusion detector; flow classifier", "flow encoder; anomaly head",
       "network flow logs; firewall logs", "flows; sessions", "packets", "features", "flow_feats; packet_feats",
       "flagging unusual traffic; malware detection"),
    _s("character animation", "motion model; motion diffusion model", "pose decoder; temporal encoder",
       "motion capture clips", "characters; clips", "frames", "joint channels", "motion_feats; pose_seq",
       "animating game characters; retargeting motion"),
    _s("drug discovery", "drug-target model; molecular generator", "protein encoder; ligand encoder; affinity head",
       "BindingDB; ChEMBL; docking scores", "compounds; complexes", "atoms; residues", "features",
       "ligand_feats; target_emb", "screening compounds; lead optimisation"),
    _s("style transfer", "style transfer network; photo filter model", "AdaIN layer; decoder",
       "WikiArt; COCO", "images", "pixels", "channels", "content_feats; style_feats",
       "painting-style filters; real-time video effects"),
    _s("face recognition", "face embedding network; face detector", "embedding head; landmark branch",
       "VGGFace2; consented selfie data", "faces; crops", "pixels", "channels", "face_feats; face_emb",
       "unlocking a phone; photo album grouping"),
    _s("learned compression", "learned image codec; neural video codec",
       "hyperprior; entropy model; synthesis transform",
       "Kodak; CLIC; Vimeo-90k", "images; frames", "latent pixels", "latent channels", "y_latent; codec_feats",
       "compressing photos; low-bitrate video calls"),
    _s("cooking recipes", "recipe generator; ingredient classifier", "ingredient encoder; step decoder",
       "scraped recipe sites; food photos", "recipes; dishes", "steps; tokens", "hidden units",
       "recipe_states; ingredient_emb", "suggesting recipes from a fridge photo; nutrition estimates"),
    _s("sports analytics", "player tracking model; match outcome predictor", "tracking encoder; event head",
       "broadcast footage; tracking data", "matches; possessions", "frames; events", "player features",
       "track_feats; player_emb", "predicting passes; scouting players"),
    _s("real estate pricing", "property valuation model; tabular transformer", "feature tokenizer; regression head",
       "property listings; sales records", "listings; properties", "attributes", "embedding dimensions",
       "listing_feats; property_emb", "estimating sale prices; flagging mispriced listings"),
    _s("insurance claims", "claims triage model; document classifier", "claim encoder; severity head",
       "claim notes; adjuster reports", "claims; policies", "tokens; events", "features",
       "claim_feats; policy_emb", "routing claims to adjusters; fraud screening"),
    _s("hydrology", "flood forecaster; rainfall-runoff model", "catchment encoder; recurrent block",
       "river gauge records; CAMELS", "catchments; gauges", "days; time steps", "hydrological variables",
       "gauge_series; catchment_feats", "flood warnings; reservoir planning"),
    _s("seismology", "earthquake detector; phase picker", "waveform encoder; picking head",
       "STEAD; regional seismic networks", "waveforms; stations", "samples", "channels",
       "waveform; seis_feats", "detecting small earthquakes; early warning"),
    _s("oceanography", "ocean state emulator; eddy detector", "spectral block; decoder",
       "satellite altimetry; Argo floats", "regions; snapshots", "grid cells", "ocean variables",
       "ocean_state; sst_feats", "forecasting sea surface temperature; tracking eddies"),
    _s("materials science", "crystal graph network; property predictor", "crystal encoder; property head",
       "Materials Project; OQMD", "crystals; structures", "atoms; sites", "feature channels",
       "crystal_feats; site_feats", "screening battery materials; predicting band gaps"),
    _s("remote sensing of crops", "crop type classifier; phenology model", "temporal attention; pixel encoder",
       "Sentinel-1 radar; field boundaries", "parcels; fields", "acquisition dates", "spectral bands",
       "parcel_series; band_series", "mapping crop types; monitoring irrigation"),
    _s("video conferencing", "noise suppression network; background segmenter", "mask decoder; recurrent bottleneck",
       "recorded calls; synthetic noisy speech", "calls; frames", "time frames", "frequency bins",
       "stft_frames; noisy_spec", "cleaning up call audio; background blur"),
    _s("photo editing", "image enhancement network; denoiser", "encoder; refinement head",
       "RAW photo pairs; MIT-Adobe FiveK", "photos; crops", "pixels", "channels", "raw_feats; photo_feats",
       "one-tap photo enhancement; night mode"),
    _s("speech-to-text translation", "speech translation model; direct speech-to-text translator",
       "acoustic encoder; text decoder", "CoVoST; MuST-C", "utterances; talks", "frames; subword tokens",
       "hidden units", "speech_states; st_feats", "subtitling talks in other languages"),
]


# ---------------------------------------------------------------- what a kind of op does inside a model

@dataclass(frozen=True)
class Role:
    """How authors describe one kind of op: the tensors it acts on, verb phrases over `{obj}` (third person), notes
    on why it is there, and names they give a helper function that does it."""

    objects: tuple[str, ...]
    actions: tuple[str, ...]
    notes: tuple[str, ...]
    helpers: tuple[str, ...]


ROLES = {
    "activation": Role(
        ("pre-activations", "hidden features", "projected features", "intermediate activations",
         "expanded features", "feed-forward activations",
         "mixer outputs", "convolution outputs"),
        ("applies the nonlinearity to the {obj}", "passes the {obj} through an activation",
         "shapes the {obj} before the next projection", "adds the nonlinearity between two projections",
         "squashes the {obj} elementwise", "activates the {obj}"),
        ("Swapping this activation was one of our ablations, so it lives in its own module.",
         "The activation sits between two projections and is purely memory bound.",
         "Each step here is a separate kernel launch in eager mode.",
         "We tried a cheaper activation here and lost accuracy, so this one stays.",
         "The activation choice follows the pretrained checkpoint.",
         "Most of the time goes to reading and writing the tensor, not to the math."),
        ("activation", "apply_activation", "nonlinearity", "pointwise_block", "act_fn")),
    "math": Role(
        ("features", "raw measurements", "intermediate values", "scores"),
        ("maps the {obj} through a fixed elementwise function", "transforms each of the {obj} independently",
         "computes a closed-form function of the {obj}"),
        ("No parameters: the function is fixed by the model design.",
         "Written out exactly as in the paper's equation.",
         "Every element is independent, so the work is all memory traffic.",
         "The formula is cheap; the tensor is large.",
         "We keep the expression as written so it is easy to compare with the paper."),
        ("transform", "elementwise_fn", "pointwise", "feature_map_fn")),
    "binary": Role(
        ("two feature streams", "branch outputs", "paired activations", "a tensor and its side input"),
        ("combines the {obj} elementwise", "merges the {obj} into one tensor", "mixes the {obj} element by element"),
        ("Broadcasting follows the usual PyTorch rules.", "Both inputs come from earlier layers of the same batch.",
         "This merge used to be two separate ops before we cleaned up the model.",
         "The second input broadcasts where its shape allows.", "Both branches have the same dtype."),
        ("combine", "merge_branches", "mix", "fuse_inputs")),
    "select": Role(
        ("padded positions", "invalid entries", "masked scores", "out-of-range values"),
        ("hides the {obj} behind a mask", "replaces the {obj} where the mask is set",
         "picks, element by element, between two values depending on a condition"),
        ("The mask comes from the data pipeline; here it is random.",
         "Masked entries must not leak into anything computed later.",
         "A boolean tensor decides per element which value survives.",
         "The condition has the same shape as the values, or broadcasts to it."),
        ("apply_mask", "select_values", "masked", "fill_masked")),
    "gate": Role(
        ("hidden features", "feature channels", "value and gate halves", "conditioning signal"),
        ("gates the {obj}", "modulates the {obj} with a learned or computed gate",
         "lets the model decide how much of the {obj} passes through"),
        ("Gating gave a small but consistent gain over a plain activation for us.",
         "In conditional models the conditioning often enters through a modulation like this.",
         "Gated units like this replaced a plain activation in our model.",
         "Gates close to zero effectively switch features off."),
        ("gated_unit", "apply_gate", "modulate", "gating")),
    "norm": Role(
        ("hidden states", "token features", "residual stream", "channel activations", "feature maps"),
        ("normalises the {obj}", "rescales the {obj} before the next sublayer",
         "keeps the {obj} at a stable scale", "standardises the {obj}",
         "conditions the {obj} for the next layer", "brings the {obj} to unit scale"),
        ("Training diverged without this normalisation.", "This is the pre-norm placement used throughout the model.",
         "The normalisation is cheap in FLOPs but reads the whole tensor twice in eager mode.",
         "The epsilon matches the checkpoint we load, so keep it as is.",
         "Normalisation layers like this one sit in every block of the {model}.",
         "Swapping the normalisation changes the numerics slightly, so we test against this version."),
        ("normalise", "norm_fn", "apply_norm", "standardise")),
    "softmax": Role(
        ("attention logits", "class scores", "routing logits", "similarity scores", "alignment scores"),
        ("normalises the {obj} into weights", "turns the {obj} into a probability distribution",
         "converts the {obj} into probabilities",
         "normalises each row of the {obj}", "produces weights from the {obj}"),
        ("The max is subtracted first, so large logits do not overflow.",
         "Where the model masks positions, they must get exactly zero probability.",
         "Rows are independent, so each one is normalised on its own.",
         "A temperature or scale is applied before the exponent where the model uses one.",
         "Every row of the output is a distribution."),
        ("stable_softmax", "probs_from_logits", "normalise_scores", "to_probs")),
    "reduce": Role(
        ("features", "per-position scores", "activations", "frame-level features", "channel responses"),
        ("summarises the {obj} along one dimension", "pools the {obj} into one value per row",
         "reduces the {obj} to one statistic per row",
         "collapses one axis of the {obj}", "aggregates the {obj}"),
        ("The reduced statistic feeds a small head later in the model.",
         "One value per row is all the next stage needs.",
         "Which dimension is reduced follows the layout of the {model}.",
         "Reductions like this are hard to fuse in eager mode.", "The result is much smaller than the input."),
        ("summarise", "reduce_rows", "pool_features", "row_statistic")),
    "scan": Role(
        ("per-step increments", "running scores", "probabilities", "segment lengths"),
        ("accumulates the {obj} along the sequence", "runs a prefix scan over the {obj}",
         "turns the {obj} into running totals"),
        ("A scan is sequential along its dimension, which makes it awkward to parallelise.",
         "Each row is scanned independently.", "Running totals like this appear in our decoding code too.",
         "Order matters: position t depends on every earlier position."),
        ("running_total", "prefix_scan", "accumulate", "scan_rows")),
    "loss": Role(
        ("predictions", "model outputs", "scores against their targets", "reconstructions"),
        ("scores the {obj} against the targets", "computes the training objective from the {obj}",
         "turns the {obj} into one scalar loss",
         "measures how far off the {obj} are"),
        ("This is the training objective; it is evaluated once per step.",
         "The reduction matches what our trainer expects.",
         "The loss is the last op of the forward pass, right before backward.",
         "Targets come from the data loader; here they are random.",
         "A scalar comes out, so the output is tiny compared to the inputs."),
        ("objective", "compute_loss", "loss_fn", "criterion")),
    "linear": Role(
        ("hidden states", "token features", "flattened features", "embeddings"),
        ("projects the {obj} to a new width", "applies a dense layer to the {obj}",
         "maps the {obj} through a learned projection",
         "mixes the channels of the {obj}", "changes the width of the {obj}"),
        ("The matrix multiply dominates; everything after it is a cheap epilogue.",
         "The inner dimension is the one the product sums over.",
         "The epilogue is where eager PyTorch spends extra memory traffic.",
         "Sizes follow the width of the {model}.", "Any epilogue after the product runs as a separate kernel in eager mode."),
        ("project", "dense_block", "linear_layer", "projection")),
    "conv": Role(
        ("feature maps", "signals", "spectrogram features", "image features"),
        ("filters the {obj} with a learned kernel", "convolves the {obj} with a small filter bank",
         "extracts local patterns from the {obj}",
         "slides a learned kernel over the {obj}"),
        ("Whatever follows the convolution runs as a separate kernel in eager mode.",
         "Padding keeps the spatial size where the architecture needs it.",
         "Kernel sizes follow the original architecture.",
         "The filters are small; the feature maps are not."),
        ("conv_block", "apply_conv", "filter_features", "conv_layer")),
    "pool": Role(
        ("feature maps", "activations", "frame features", "spatial features"),
        ("downsamples the {obj}", "pools the {obj} over local windows", "shrinks the {obj} before the next stage"),
        ("Pooling summarises each local window.", "No parameters: the window is fixed.",
         "The pooled map feeds the classifier.",
         "Windows do not overlap unless the stride is smaller than the kernel."),
        ("downsample", "pool", "pool_features", "shrink")),
    "index": Role(
        ("lookup tables", "rows of a table", "selected positions", "token ids"),
        ("looks up rows for the {obj}", "gathers the entries the indices point to",
         "moves values to the positions given by the indices",
         "reads the {obj} at the given indices"),
        ("Indices are integers drawn at random here; in the model they come from the tokenizer or a top-k.",
         "Memory access is irregular, which is why this step shows up in profiles.",
         "The index tensor is usually much smaller than the data it addresses.",
         "Indices are assumed to be in range; the model guarantees that."),
        ("lookup", "gather_rows", "select_entries", "index_rows")),
    "layout": Role(
        ("feature maps", "hidden states", "channel groups", "sequence blocks"),
        ("rearranges the {obj} into the layout the next layer expects", "reorders the dimensions of the {obj}",
         "reshapes the {obj} between two stages",
         "moves the {obj} into a new memory layout"),
        ("No arithmetic worth speaking of: the cost is the copy.",
         "The next layer wants this layout, so the data has to move once.",
         "In eager mode this materialises a full copy of the tensor.",
         "Getting the layout right here saves a transpose later."),
        ("rearrange", "to_layout", "reshape_block", "relayout")),
    "quant": Role(
        ("activations", "weights", "feature values", "logits"),
        ("quantises the {obj} to a small integer grid", "simulates low-precision {obj}",
         "maps the {obj} between integer and float representations"),
        ("We use this for quantisation-aware training experiments.",
         "The scale is fixed here; in the real model it comes from calibration.",
         "Rounding is to nearest, the mode the deployment runtime uses.",
         "Values outside the integer range are clipped when quantising."),
        ("quantise", "fake_quant", "to_int_grid", "dequant")),
    "logic": Role(
        ("values", "scores", "integer codes", "activations", "labels"),
        ("computes a mask from the {obj}", "combines the {obj} with integer or boolean logic",
         "derives flags from the {obj}"),
        ("The result is used as a mask further down the pipeline.", "The output is exact: no rounding is involved.",
         "Booleans come out of comparisons; integers are kept as they are."),
        ("make_mask", "flags_from", "compare_values", "logic_step")),
    "attention": Role(
        ("queries, keys and values", "attention heads", "token representations", "head outputs"),
        ("runs scaled dot-product attention over the {obj}", "mixes information across positions of the {obj}",
         "computes one attention step over the {obj}"),
        ("Sequence length is the main cost driver; the score matrix is quadratic in it.",
         "Heads are independent, so they batch together.", "This is the core of every layer of the model.",
         "Attention weights are not returned, only the mixed values."),
        ("attend", "attention", "sdpa_reference", "attention_step")),
    "position": Role(
        ("query and key heads", "token representations", "attention inputs"),
        ("rotates the {obj} by their position", "applies rotary position embeddings to the {obj}",
         "encodes positions into the {obj}"),
        ("The rotation angle depends only on the position and the frequency.",
         "Queries and keys are rotated the same way, so relative positions survive the dot product.",
         "No learned parameters: positions are encoded by a fixed rotation."),
        ("apply_rotary", "rotate", "rope", "add_positions")),
    "distance": Role(
        ("embeddings", "paired vectors", "query and candidate vectors", "feature vectors"),
        ("measures how close pairs of {obj} are", "scores the similarity of the {obj}",
         "compares the {obj} row by row"),
        ("The score feeds a ranking or a contrastive loss.", "Rows are compared one to one, not all pairs.",
         "Embeddings are not normalised beforehand.",
         "One score per pair of rows."),
        ("similarity", "pair_distance", "match_score", "compare_rows")),
    "embedding": Role(
        ("token ids", "item ids", "category ids", "positions"),
        ("embeds the {obj} into dense vectors", "turns the {obj} into learned vectors",
         "looks up a learned vector for each of the {obj}"),
        ("The table is the largest parameter of this part of the model.",
         "Ids are random here; in the model they come from the tokenizer.",
         "The lookup is pure memory traffic.",
         "Rows of the table are read in the order the ids arrive."),
        ("embed", "lookup", "embed_ids", "token_lookup")),
}

# Families whose role is not found by the rules of `role_of`.
_FAMILY_ROLES = {
    "activation": "relu gelu silu sigmoid tanh leaky_relu elu hardswish softplus mish hardshrink softshrink celu "
                  "threshold selu hardsigmoid hardtanh logsigmoid relu6 softsign tanhshrink prelu elementwise_chain "
                  "clamp",
    "math": "exp log sqrt sin cos pow atan erf reciprocal rsqrt sign",
    "binary": "add sub mul div maximum minimum atan2 hypot fmod remainder copysign lerp scaled_add "
              "squared_difference binary_broadcast",
    "select": "where masked_fill",
    "gate": "sigmoid_gate glu geglu reglu swiglu swiglu_gate film adaptive_modulation layer_scale channel_gate "
            "channel_bias",
    "norm": "layer_norm rms_norm llm_rmsnorm group_norm instance_norm batch_norm standardize l2_normalize",
    "softmax": "softmax log_softmax masked_softmax causal_softmax",
    "reduce": "argmax argmin",
    "scan": "cumsum cumprod cummin cummax logcumsumexp reverse_cumsum",
    "loss": "cross_entropy kl_div",
    "linear": "linear gemm_epilogue matvec mlp tensor_core",
    "conv": "conv1d conv2d depthwise_conv2d conv_epilogue",
    "pool": "max_pool1d max_pool2d avg_pool1d avg_pool2d global_avg_pool",
    "index": "gather scatter scatter_add index_select one_hot",
    "embedding": "embedding",
    "layout": "transpose permute concat pad roll flip repeat pixel_shuffle channel_shuffle triangular_mask "
              "upsample_nearest upsample_bilinear",
    "quant": "quantize_int8 dequantize fake_quantize round",
    "logic": "compare bitwise integer_arith logical_ops",
    "attention": "attention",
    "position": "rotary_embedding",
    "distance": "cosine_similarity pairwise_distance",
}
FAMILY_ROLE = {family: role for role, families in _FAMILY_ROLES.items() for family in families.split()}


def role_of(family: str) -> str | None:
    """The role (a key of ROLES) of an operator family; None for a family no rule covers."""
    if family in FAMILY_ROLE:
        return FAMILY_ROLE[family]
    if family.endswith("_loss"):
        return "loss"
    if family.startswith("reduce_"):
        return "reduce"
    if family.startswith(("matmul", "bmm")):
        return "linear"
    return None


# Roles whose main input is a tensor of features (named after the setting's data); the others take ids, codes,
# masks or predictions.
FEATURE_ROLES = set(ROLES) - {"logic", "index", "embedding", "loss"}


# ---------------------------------------------------------------- sentences

SETTING_SENTENCES = [
    "In our {model} for {field}, this {action}.", "{Action} in the {part} of a {model}.",
    "Used by the {part} of a {model} trained on {data}: it {action}.",
    "We use this in a {model} for {goal}; it {action}.", "Part of the {part} in our {field} stack, where it {action}.",
    "The {part} of our {model} {action}; this module is that step on its own.",
    "From a {field} project ({goal}): the step that {action}.",
    "{Action} ({field}, {model}).", "Our {field} team's {model} {action} at this point.",
    "This {action} for the {part}; the surrounding {model} is left out.",
    "When the {model} processes {items}, the {part} {action}.", "Inside the {part}: {action} (from our {field} work).",
    "The {model} we use for {goal} {action} in its {part}.", "Step of the {part} that {action}, as in our {model}.",
    "Taken from the {part} of a {model}; the module {action}.",
    "In the {field} pipeline the {part} {action}, which is what this reproduces.",
    "Our {model} for {goal}: its {part} {action}.", "Here the {part} of a {model} {action}, nothing more.",
]
# How the input's dimensions read in a setting: {b}/{s}/{d}: sizes; {items}/{steps}/{features}: the setting's words.
SHAPE_SENTENCES = {
    3: ["The input holds {b} {items} of {s} {steps}, with {d} {features} per position.",
        "Inputs are {b} {items} x {s} {steps} x {d} {features}.",
        "Think of x as ({b} {items}, {s} {steps}, {d} {features}).",
        "Shapes mimic a batch of {b} {items}, {s} {steps} long, {d} {features} wide."],
    2: ["Each of the {b} rows is one of the {items}; the {d} columns are its {features}.",
        "Inputs are {b} {items} with {d} {features} each.", "Rows are {items} ({b} of them), columns are {features}."],
}
GENERAL_NOTES = [
    "The sizes are the ones we profile with.", "Written in plain PyTorch so a fused kernel can be checked against it.",
    "This is the eager version; it launches a separate kernel for each step.",
    "Inputs are random; the real ones come from {data}.", "Profiled on batches from {data}.",
    "The batch is fixed so that timings are comparable between runs.",
    "Replaces an older version that looped over the {items} in Python.",
    "Numbers match the {data} configuration of the {model}.",
    "Nothing here is specific to {field}; the same block appears in other models.",
    "A fused version of this module is on our list of optimisations.",
    "It shows up near the top of the profile of the {model}.",
    "Kept deliberately small so it is easy to benchmark.",
    "Shapes are fixed so the benchmark is reproducible.", "Copied from the {field} repository without changes.",
    "The file has no project imports, so it runs on its own.",
    "If you change the sizes, keep them in sync with the {model} config.",
    "The inputs do not need gradients for the benchmark.", "Runs on a single GPU; nothing here is distributed.",
    "Production batches are smaller; these are the training shapes.",
    "The same computation appears several times per step in the {model}.",
    "Check a custom kernel against this module before swapping it in.",
    "Timed with CUDA events after a few warm-up iterations.",
    "Shapes were taken from a real batch of {data}.",
    "The {part} is otherwise cheap; this step is what we want to speed up.",
    "A colleague on the {field} side wrote the original; this is a cleaned-up copy.",
]
# One-line class docstrings that say what the module does in the setting and what it computes ({desc}).
LINE_DOCS = ["{Action}: {desc}.", "{Action} ({desc}).", "{Desc}; it {action}.", "{Desc} -- {action} in the {part}.",
             "{Action} for the {part} ({desc})."]
# What the main input is, in a forward docstring's Args: entry.
ARGUMENTS = ["{obj} from the {part}", "{obj} of shape ({items}, ..., {features})", "{obj}, one row per position",
             "the {features} of a batch of {items}", "{obj} coming out of the previous layer"]
# Docstrings of get_inputs().
INPUTS_DOCS = ["Random {items} at the benchmark sizes.", "A batch shaped like the {data} inputs.",
               "Inputs for one forward pass.", "Random stand-ins for {items} from {data}.",
               "Sizes match what the {model} sees in training.", "One batch of {items}; values are random."]
# Notes on how the model is trained (the numbers are drawn per file).
TRAINING_NOTES = [
    "We train for {steps_k}k steps on {gpus} GPUs.", "The full {model} has about {params}M parameters.",
    "Training batches hold {batch} {items}.", "A training run takes about {hours} hours on {gpus} GPUs.",
    "The {model} calls this {repeats} times per forward pass.", "We fine-tune for {steps_k}k steps on {data}.",
    "Our {model} has {repeats} layers; each one runs this step.",
]
HEADER_LINES = [
    "# {Field}: the {part} of our {model}.", "# Extracted from the {part} of a {model} ({data} runs).",
    "# {Model} for {goal} -- {part}.", "# Profiling target: {part} ({field}).",
    "# From the {field} codebase, trimmed to the one module we want to speed up.",
    "# Reference module for the {part}; see the training config for {data}.",
    "# Owner: {field} team. Used for {goal}.",
    "# {Field} experiments: {part} of the {model}.", "# Slow step in the {model} ({data}).",
    "# Stand-alone {part} from our {field} code.", "# {Model}, {part}: reference implementation.",
    "# Benchmark case from the {field} team ({goal}).",
]
# Second header lines some authors add.
HEADER_FOLLOW_UPS = ["# Shapes follow our {data} setup.", "# Nothing here needs a GPU except the kernels we compare.",
                     "# Keep in sync with the {model} code.", "# Numbers below are the training sizes.",
                     "# Do not edit the reference; compare new kernels against it.",
                     "# Only depends on torch.", "# Inputs are random; no data files needed."]
INPUT_COMMENTS = {
    3: ["# {b} {items}, {s} {steps} each", "# ({items}, {steps}, {features})", "# a batch of {items} from {data}",
        "# {items} x {steps} x {features}"],
    2: ["# {b} {items} with {d} {features}", "# ({items}, {features})", "# one row per item of {data}",
        "# {items} x {features}"],
}


# Parts most models have, drawn now and then instead of the setting's own parts.
GENERIC_PARTS = [
    "decoder block", "encoder layer", "prediction head", "feature extractor", "stem", "bottleneck", "residual branch",
    "attention block", "feed-forward sublayer", "projection head", "output layer", "input adapter", "gating network",
    "pooling stage", "upsampling path", "downsampling path", "skip connection", "normalisation layer",
    "classifier head", "regression head", "embedding layer", "mixer block", "token mixer", "channel mixer",
    "refinement stage", "fusion module", "context module", "temporal block", "spatial block", "adapter",
    "LoRA branch", "cross-attention block", "gating unit", "highway layer", "interaction layer", "recurrent cell",
    "inverted residual", "depthwise block", "squeeze-and-excitation block", "bottleneck adapter",
    "shared trunk", "auxiliary head", "multi-task head", "calibration head", "uncertainty head",
]
# Ordinals for a part that repeats through a model ("the third decoder layer").
ORDINALS = ["first", "second", "third", "fourth", "last", "penultimate", "final", "early", "middle", "top"]
# Qualifiers an author puts before the model's name now and then ("our 12-layer conformer encoder").
MODEL_QUALIFIERS = ["small", "base-size", "large", "distilled", "production", "baseline", "lightweight", "pruned",
                    "experimental", "4-layer", "6-layer", "8-layer", "12-layer", "16-layer", "24-layer", "32-layer",
                    "student", "teacher", "streaming", "compact", "wide", "deep", "narrow", "quantised"]
# Trailing comments of the size constants the setting names ({items}, {steps}, {features}: its words).
SETTING_SIZE_COMMENTS = {
    "items": ["# {items} per batch", "# number of {items}", "# {items}", "# batch of {items}"],
    "steps": ["# {steps} per sequence", "# number of {steps}", "# {steps}", "# sequence length in {steps}"],
    "features": ["# {features}", "# {features} per position", "# width of the {model}", "# number of {features}"],
}
# Size constants the setting names: which of its words the size counts.
SIZE_ROLES = {"batch_size": "items", "seq_len": "steps", "num_tokens": "steps", "length": "steps", "dim": "features"}


def draw_scenario(rng: random.Random) -> Scenario:
    return rng.choice(SCENARIOS)


def identifier(phrase: str) -> str:
    """A snake_case identifier from a phrase ("mel bins" -> "mel_bins", "lat-lon cells" -> "lat_lon_cells")."""
    return re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_")


class ScenarioWords:
    """One file's choices from its scenario and its op's role (each drawn once, so a file tells one story)."""

    def __init__(self, scenario: Scenario, role_name: str | None, rng: random.Random):
        self.rng = rng
        role = ROLES.get(role_name) if role_name else None
        pick = rng.choice
        model = pick(scenario.models)
        if rng.random() < 0.45:
            model = f"{pick(MODEL_QUALIFIERS)} {model}"
        part = pick(GENERIC_PARTS) if rng.random() < 0.25 else pick(scenario.parts)
        if part.endswith(("block", "layer", "stage", "level", "module")) and rng.random() < 0.4:
            part = f"{pick(ORDINALS)} {part}"
        self.words = {"field": scenario.field, "model": model, "part": part,
                      "data": pick(scenario.data), "items": pick(scenario.items), "steps": pick(scenario.steps),
                      "features": pick(scenario.features), "goal": pick(scenario.goals)}
        self.role = role
        if role is not None:
            self.words["obj"] = pick(role.objects)
            self.words["action"] = pick(role.actions).format(**self.words)
        else:
            self.words["action"] = f"is one step of the {self.words['part']}"
        # how the model is trained, for the training notes (one set of numbers per file)
        self.words.update(steps_k=pick([20, 50, 100, 150, 200, 300, 400, 500, 800]),
                          gpus=pick([1, 2, 4, 8, 16, 32, 64, 128]), params=rng.randint(3, 900),
                          hours=rng.randint(2, 240), repeats=rng.randint(2, 48),
                          batch=pick([8, 16, 32, 64, 128, 256, 512, 1024]))
        self.used_notes: set[str] = set()
        # the keys the purpose and header templates of vocab.py use
        self.words.update(comp=self.words["part"], kind=self.words["model"], domain=self.words["field"])
        for key in ("field", "model", "action", "domain"):
            self.words[key.capitalize()] = _capital(self.words[key])

    def fill(self, template: str, **values) -> str:
        return fix_articles(template.format(**self.words, **values))

    def setting(self) -> str:
        return self.fill(self.rng.choice(SETTING_SENTENCES))

    def note(self) -> str:
        """An author's note, not one this file already has."""
        r = self.rng
        pool = TRAINING_NOTES if r.random() < 0.2 else GENERAL_NOTES + (list(self.role.notes) * 2 if self.role else [])
        note = r.choice([n for n in pool if n not in self.used_notes])
        self.used_notes.add(note)
        return self.fill(note)

    def shape(self, sizes: list[int]) -> str | None:
        templates = SHAPE_SENTENCES.get(len(sizes))
        if not templates:
            return None
        return self.fill(self.rng.choice(templates), **_size_keys(sizes))

    def input_comment(self, sizes: list[int]) -> str | None:
        templates = INPUT_COMMENTS.get(len(sizes))
        if not templates:
            return None
        return self.fill(self.rng.choice(templates), **_size_keys(sizes))

    def size_name(self, constant: str) -> str | None:
        """A name for a size constant in the setting's words ("batch_size" -> "num_utterances"), if it has one."""
        key = SIZE_ROLES.get(constant)
        if key is None:
            return None
        phrase = self.words[key]
        if phrase.endswith(" dimensions"):
            return identifier(phrase[:-len(" dimensions")]) + "_dim"
        name = identifier(phrase)
        return self.rng.choice(["num_", "n_"]) + name if name.count("_") <= 1 else None

    def argument(self) -> str:
        """What the main input is, for an Args: entry ("hidden states from the attention block")."""
        return self.fill(self.rng.choice(ARGUMENTS))

    def imperative(self) -> str:
        """The action as a comment says it ("normalise the hidden states")."""
        verb, _, rest = self.words["action"].partition(" ")
        return f"{_imperative(verb)} {rest}"

    def line_doc(self, desc: str) -> str:
        templates = [t for t in LINE_DOCS if "({desc})" not in t] if "(" in desc else LINE_DOCS  # no nested brackets
        return self.fill(self.rng.choice(templates), desc=desc, Desc=_capital(desc))

    def inputs_doc(self) -> str:
        return self.fill(self.rng.choice(INPUTS_DOCS))

    def size_comment(self, constant: str) -> str | None:
        """A trailing comment saying what a size constant counts in the setting, if it counts one of its things."""
        key = SIZE_ROLES.get(constant)
        return self.fill(self.rng.choice(SETTING_SIZE_COMMENTS[key])) if key else None

    def follow_up(self) -> str:
        return self.fill(self.rng.choice(HEADER_FOLLOW_UPS))

    def helper_name(self) -> str | None:
        return self.rng.choice(self.role.helpers) if self.role else None


def article(phrase: str) -> str:
    """"a" or "an" before a phrase, by how its first word is spoken ("an x-vector network", "a U-Net")."""
    word = re.split(r"[\s-]", phrase, maxsplit=1)[0]
    if word.lower().startswith(("one", "uni", "use", "eu")) or word == "U":
        return "a"
    vowel_sound = word[:1].lower() in "aeio" or word[:1] == "x"
    spelled_acronym = word.isupper() and word[:1] in "FHLMNRSX"  # "an N-BEATS-style forecaster"
    return "an" if vowel_sound or spelled_acronym else "a"


def _imperative(verb: str) -> str:
    """The imperative of a third-person verb ("applies" -> "apply", "passes" -> "pass", "turns" -> "turn")."""
    if verb.endswith("ies"):
        return verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes")):
        return verb[:-2]
    return verb[:-1] if verb.endswith("s") else verb


def fix_articles(text: str) -> str:
    """Every "a"/"an" of `text` agreeing with the word after it (templates write "a {model}")."""
    def agree(m: re.Match) -> str:
        word = article(m.group(2))
        return (word.capitalize() if m.group(1)[0].isupper() else word) + " " + m.group(2)
    return re.sub(r"\b(an?|An?) ([\w][\w-]*)", agree, text)


def _size_keys(sizes: list[int]) -> dict:
    keys = {"b": sizes[0], "d": sizes[-1]}
    if len(sizes) == 3:
        keys["s"] = sizes[1]
    return keys


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
